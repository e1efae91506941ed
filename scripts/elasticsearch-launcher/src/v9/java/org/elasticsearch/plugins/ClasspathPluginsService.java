package org.elasticsearch.plugins;

import java.util.ArrayList;
import java.util.Collection;
import java.util.List;

import org.elasticsearch.Build;
import org.elasticsearch.action.admin.cluster.node.info.PluginsAndModules;
import org.elasticsearch.common.settings.Settings;
import org.elasticsearch.env.Environment;

/**
 * A PluginsService over an empty PluginsLoader that instantiates the given plugin classes from the classpath
 * (what the test framework's MockPluginsService does; 9.x signatures). In org.elasticsearch.plugins because
 * LoadedPlugin and loadExtensions are package-private.
 */
public final class ClasspathPluginsService extends PluginsService {

    private final List<LoadedPlugin> classpathPlugins;

    public ClasspathPluginsService(
        Settings settings,
        Environment environment,
        PluginsLoader pluginsLoader,
        Collection<Class<? extends Plugin>> classes
    ) {
        super(settings, environment.configDir(), pluginsLoader);
        List<LoadedPlugin> loaded = new ArrayList<>();
        for (Class<? extends Plugin> pluginClass : classes) {
            Plugin plugin = loadPlugin(pluginClass, settings, environment.configDir());
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
                false,
                PluginDescriptor.DeploymentTarget.ALL
            );
            loaded.add(new LoadedPlugin(descriptor, plugin, pluginClass.getClassLoader()));
        }
        loadExtensions(loaded);
        this.classpathPlugins = List.copyOf(loaded);
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
