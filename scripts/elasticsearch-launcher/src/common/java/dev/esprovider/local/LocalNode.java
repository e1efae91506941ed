package dev.esprovider.local;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

import org.elasticsearch.common.logging.LogConfigurator;
import org.elasticsearch.common.settings.Settings;
import org.elasticsearch.env.Environment;
import org.elasticsearch.node.InternalSettingsPreparer;
import org.elasticsearch.node.LocalNodeConstruction;
import org.elasticsearch.node.Node;
import org.elasticsearch.plugins.Plugin;
import org.elasticsearch.transport.netty4.Netty4Plugin;

/**
 * Starts one real Elasticsearch node in this JVM, the way the Elasticsearch test framework (MockNode) does.
 *
 * Arguments are node settings as key=value (the same names as elasticsearch.yml). Only the server and
 * transport-netty4 are published on Maven Central, so the node loads Netty4Plugin plus {@link LocalTestPlugin},
 * a TEST STAND-IN for the unpublished rest-root and analysis-common modules (see LocalTestPluginBase).
 * The version-specific wiring (package-private node construction and a classpath plugins service) lives in
 * src/v8 and src/v9; this class compiles against either.
 * A shutdown hook closes the node, so SIGTERM is a clean stop.
 */
public final class LocalNode {

    private static final List<Class<? extends Plugin>> PLUGINS = List.of(Netty4Plugin.class, LocalTestPlugin.class);

    private static final String LOG4J2_PROPERTIES = String.join("\n",
        "status = error",
        "appender.console.type = Console",
        "appender.console.name = console",
        "appender.console.layout.type = PatternLayout",
        "appender.console.layout.pattern = [%d{ISO8601}][%-5p][%-25c{1.}] [%node_name]%marker %m%n",
        "rootLogger.level = info",
        "rootLogger.appenderRef.console.ref = console",
        "appender.header_warning.type = HeaderWarningAppender",
        "appender.header_warning.name = header_warning",
        "logger.deprecation.name = org.elasticsearch.deprecation",
        "logger.deprecation.level = WARN",
        "logger.deprecation.appenderRef.console.ref = console",
        "logger.deprecation.appenderRef.header_warning.ref = header_warning",
        "logger.deprecation.additivity = false",
        "");

    private LocalNode() {}

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
        String nodeName = settings.get("node.name", "node-0");
        Path home = Path.of(settings.get("path.home"));
        Path config = home.resolve("config");
        // Empty modules/plugins folders: every plugin comes from the classpath.
        for (Path dir : List.of(config, home.resolve("modules"), home.resolve("plugins"))) {
            Files.createDirectories(dir);
        }
        writeIfChanged(config.resolve("log4j2.properties"), LOG4J2_PROPERTIES);

        LogConfigurator.registerErrorListener();
        LogConfigurator.setNodeName(nodeName);
        Environment environment = InternalSettingsPreparer.prepareEnvironment(settings, Map.of(), config, () -> nodeName);
        LogConfigurator.configure(environment, true);

        Node node = LocalNodeConstruction.create(environment, PLUGINS);
        CountDownLatch stopped = new CountDownLatch(1);
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            try {
                node.close();
                node.awaitClose(30, TimeUnit.SECONDS);
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

    private static void writeIfChanged(Path file, String content) throws IOException {
        if (Files.exists(file) && Files.readString(file, StandardCharsets.UTF_8).equals(content)) {
            return;
        }
        Files.writeString(file, content, StandardCharsets.UTF_8);
    }
}
