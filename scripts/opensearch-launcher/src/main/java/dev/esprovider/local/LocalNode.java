package dev.esprovider.local;

import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Collection;
import java.util.Collections;
import java.util.List;
import java.util.concurrent.CountDownLatch;

import org.opensearch.cluster.service.ClusterService;
import org.opensearch.common.logging.LogConfigurator;
import org.opensearch.common.settings.Settings;
import org.opensearch.env.Environment;
import org.opensearch.node.InternalSettingsPreparer;
import org.opensearch.node.Node;
import org.opensearch.plugins.Plugin;

/**
 * Starts one real OpenSearch node in this JVM, with the plugin modules on the classpath.
 *
 * Arguments are node settings as key=value (the same names as opensearch.yml). The k-NN and the security
 * plugins are loaded when their classes are on the classpath, so the caller decides by what it puts there
 * (scripts/opensearch-local puts the security plugin there only in its secure mode, with its settings).
 * A shutdown hook closes the node, so SIGTERM is a clean stop.
 */
public final class LocalNode extends Node {

    /** Optional, like k-NN; unlike k-NN its absence is the normal (plain) mode, so it is not reported. */
    private static final String SECURITY = "org.opensearch.security.OpenSearchSecurityPlugin";

    private static final String[] PLUGIN_CLASSES = {
        "org.opensearch.transport.Netty4Plugin",
        "org.opensearch.analysis.common.CommonAnalysisPlugin",
        "org.opensearch.painless.PainlessPlugin",
        "org.opensearch.index.mapper.MapperExtrasPlugin",
        "org.opensearch.index.reindex.ReindexPlugin",
        "org.opensearch.knn.plugin.KNNPlugin",
        SECURITY,
    };

    private LocalNode(Environment environment, Collection<Class<? extends Plugin>> plugins) {
        super(environment, plugins, true);
    }

    @Override
    protected void configureNodeAndClusterIdStateListener(ClusterService clusterService) {
        // The stock listener sets a static logging field that assumes a full distribution; not needed here.
    }

    @SuppressWarnings("unchecked")
    private static List<Class<? extends Plugin>> plugins() {
        List<Class<? extends Plugin>> found = new ArrayList<>();
        for (String name : PLUGIN_CLASSES) {
            try {
                found.add((Class<? extends Plugin>) Class.forName(name));
            } catch (ClassNotFoundException e) {
                if (name.equals(SECURITY)) {
                    continue; // plain mode: no TLS, no authentication
                }
                if (!name.contains(".knn.")) {
                    throw new IllegalStateException("plugin class missing from the classpath: " + name, e);
                }
                System.err.println("k-NN plugin not on the classpath: vector search disabled");
            }
        }
        return found;
    }

    public static void main(String[] args) throws Exception {
        Settings.Builder builder = Settings.builder();
        for (String arg : args) {
            int eq = arg.indexOf('=');
            if (eq <= 0) {
                throw new IllegalArgumentException("expected key=value, got: " + arg);
            }
            builder.put(arg.substring(0, eq), arg.substring(eq + 1));
        }
        Settings settings = builder.build();
        String nodeName = settings.get("node.name", "local-0");
        Path home = Path.of(settings.get("path.home"));
        LogConfigurator.configureWithoutConfig(settings);
        Environment environment = InternalSettingsPreparer.prepareEnvironment(
            settings, Collections.emptyMap(), home.resolve("config"), () -> nodeName);

        LocalNode node = new LocalNode(environment, plugins());
        CountDownLatch stopped = new CountDownLatch(1);
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            try {
                node.close();
            } catch (Exception e) {
                e.printStackTrace();
            } finally {
                stopped.countDown();
            }
        }));
        node.start();
        System.out.println("node started: " + nodeName);
        stopped.await();
    }
}
