package org.elasticsearch.node;

import java.util.Collection;

import org.elasticsearch.common.settings.Settings;
import org.elasticsearch.env.Environment;
import org.elasticsearch.plugins.ClasspathPluginsService;
import org.elasticsearch.plugins.Plugin;
import org.elasticsearch.plugins.PluginsService;

/**
 * Builds a Node whose plugins come from the classpath, as the Elasticsearch test framework's MockNode does
 * (8.x signatures). It lives in org.elasticsearch.node because NodeConstruction.prepareConstruction and
 * NodeServiceProvider are package-private.
 */
public final class LocalNodeConstruction {

    private LocalNodeConstruction() {}

    public static Node create(Environment environment, Collection<Class<? extends Plugin>> plugins) {
        NodeServiceProvider provider = new NodeServiceProvider() {
            @Override
            PluginsService newPluginService(Environment env, Settings settings) {
                return new ClasspathPluginsService(settings, env, plugins);
            }
        };
        return new Node(NodeConstruction.prepareConstruction(environment, provider, true));
    }
}
