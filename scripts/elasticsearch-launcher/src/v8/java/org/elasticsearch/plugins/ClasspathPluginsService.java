package org.elasticsearch.plugins;

import java.util.ArrayList;
import java.util.Collection;
import java.util.List;
import java.util.Map;

import org.elasticsearch.Build;
import org.elasticsearch.action.admin.cluster.node.info.PluginsAndModules;
import org.elasticsearch.common.settings.Settings;
import org.elasticsearch.env.Environment;
import org.elasticsearch.jdk.ModuleQualifiedExportsService;

/**
 * A PluginsService over empty modules/plugins folders that instantiates the given plugin classes from the
 * classpath (what the test framework's MockPluginsService does; 8.x signatures). In org.elasticsearch.plugins
 * because LoadedPlugin and loadExtensions are package-private.
 */
public final class ClasspathPluginsService extends PluginsService {

    private final List<LoadedPlugin> classpathPlugins;

    public ClasspathPluginsService(Settings settings, Environment environment, Collection<Class<? extends Plugin>> classes) {
        super(settings, environment.configFile(), environment.modulesFile(), environment.pluginsFile());
        List<LoadedPlugin> loaded = new ArrayList<>();
        for (Class<? extends Plugin> pluginClass : classes) {
            Plugin plugin = loadPlugin(pluginClass, settings, environment.configFile());
            PluginDescriptor descriptor = new PluginDescriptor(
                pluginClass.getName(),
                "classpath plugin",
                "NA",
                Build.current().version(),
                Integer.toString(Runtime.version().feature()),
                pluginClass.getName(),
                null,
                List.of(),
                false,
                false,
                false,
                false
            );
            loaded.add(new LoadedPlugin(descriptor, plugin));
        }
        loadExtensions(loaded);
        this.classpathPlugins = List.copyOf(loaded);
    }

    @Override
    protected void addServerExportsService(Map<String, List<ModuleQualifiedExportsService>> qualifiedExports) {
        // The server jar is on the classpath (unnamed module), not the module path: there are no exports to add.
    }

    @Override
    protected List<LoadedPlugin> plugins() {
        return classpathPlugins;
    }

    @Override
    public PluginsAndModules info() {
        return new PluginsAndModules(
            classpathPlugins.stream().map(p -> new PluginRuntimeInfo(p.descriptor())).toList(),
            List.of()
        );
    }
}
