package org.elasticsearch.node;

import java.util.Collection;
import java.util.Map;
import java.util.Set;

import org.elasticsearch.env.Environment;
import org.elasticsearch.plugins.ClasspathPluginsService;
import org.elasticsearch.plugins.Plugin;
import org.elasticsearch.plugins.PluginsLoader;
import org.elasticsearch.plugins.PluginsService;

/**
 * Builds a Node whose plugins come from the classpath, as the Elasticsearch test framework's MockNode does
 * (9.x signatures: an empty PluginsLoader stands for the modules/plugins folders). It lives in
 * org.elasticsearch.node because NodeConstruction.prepareConstruction and NodeServiceProvider are package-private.
 */
public final class LocalNodeConstruction {

    private LocalNodeConstruction() {}

    public static Node create(Environment environment, Collection<Class<? extends Plugin>> plugins) {
        PluginsLoader loader = PluginsLoader.createPluginsLoader(Set.of(), Set.of(), Map.of(), false);
        NodeServiceProvider provider = new NodeServiceProvider() {
            @Override
            PluginsService newPluginService(Environment env, PluginsLoader pluginsLoader) {
                return new ClasspathPluginsService(env.settings(), env, pluginsLoader, plugins);
            }
        };
        return new Node(NodeConstruction.prepareConstruction(environment, loader, provider, true));
    }
}
