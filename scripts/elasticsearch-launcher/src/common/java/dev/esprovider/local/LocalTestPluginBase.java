package dev.esprovider.local;

import java.util.Collection;
import java.util.List;
import java.util.Map;
import java.util.function.Supplier;

import org.apache.lucene.analysis.Analyzer;
import org.apache.lucene.analysis.cjk.CJKAnalyzer;
import org.apache.lucene.analysis.en.EnglishAnalyzer;
import org.elasticsearch.Build;
import org.elasticsearch.client.internal.node.NodeClient;
import org.elasticsearch.cluster.service.ClusterService;
import org.elasticsearch.index.analysis.AnalyzerProvider;
import org.elasticsearch.index.analysis.AnalyzerScope;
import org.elasticsearch.indices.analysis.AnalysisModule.AnalysisProvider;
import org.elasticsearch.plugins.ActionPlugin;
import org.elasticsearch.plugins.AnalysisPlugin;
import org.elasticsearch.plugins.Plugin;
import org.elasticsearch.rest.BaseRestHandler;
import org.elasticsearch.rest.RestHandler;
import org.elasticsearch.rest.RestRequest;
import org.elasticsearch.rest.RestResponse;
import org.elasticsearch.rest.RestStatus;
import org.elasticsearch.xcontent.XContentBuilder;

/**
 * TEST STAND-IN, NOT ELASTICSEARCH CODE. Maven Central publishes the Elasticsearch server and transport-netty4
 * but not the distribution's modules rest-root (GET / and HEAD /) and analysis-common (the language analyzers).
 * This local plugin fills just the two gaps the provider's tests meet; production clusters have the real modules:
 *
 *   1. a REST handler answering GET / and HEAD / with the usual root JSON (name, cluster_name, cluster_uuid,
 *      version.number of the real server, build_flavor, lucene_version, tagline), which clients' info()/ping() need;
 *   2. the analyzers "english" and "cjk", registered as Lucene's own EnglishAnalyzer and CJKAnalyzer (the classes
 *      analysis-common wraps) with their default settings, so mappings naming them load.
 *
 * Painless, _reindex and the _by_query APIs (lang-painless, reindex) are not replaced and do not exist on this node.
 * The ActionPlugin signature differs between 8.x and 9.x, so src/v8 and src/v9 each add the registration of
 * {@link #rootHandler()} in their LocalTestPlugin subclass.
 */
public abstract class LocalTestPluginBase extends Plugin implements ActionPlugin, AnalysisPlugin {

    private volatile ClusterService clusterService;

    @Override
    public Collection<?> createComponents(PluginServices services) {
        this.clusterService = services.clusterService();
        return List.of();
    }

    @Override
    public Map<String, AnalysisProvider<AnalyzerProvider<? extends Analyzer>>> getAnalyzers() {
        return Map.of(
            "english", (indexSettings, environment, name, settings) -> new FixedAnalyzerProvider(name, new EnglishAnalyzer()),
            "cjk", (indexSettings, environment, name, settings) -> new FixedAnalyzerProvider(name, new CJKAnalyzer())
        );
    }

    /** The GET / and HEAD / handler (stand-in for the rest-root module). */
    protected final RestHandler rootHandler() {
        return new RootHandler(() -> clusterService);
    }

    private record FixedAnalyzerProvider(String name, Analyzer analyzer) implements AnalyzerProvider<Analyzer> {
        @Override
        public AnalyzerScope scope() {
            return AnalyzerScope.INDEX;
        }

        @Override
        public Analyzer get() {
            return analyzer;
        }
    }

    private static final class RootHandler extends BaseRestHandler {
        private final Supplier<ClusterService> clusterService;

        RootHandler(Supplier<ClusterService> clusterService) {
            this.clusterService = clusterService;
        }

        @Override
        public String getName() {
            return "local_test_root_action";
        }

        @Override
        public List<Route> routes() {
            return List.of(new Route(RestRequest.Method.GET, "/"), new Route(RestRequest.Method.HEAD, "/"));
        }

        @Override
        protected RestChannelConsumer prepareRequest(RestRequest request, NodeClient client) {
            return channel -> {
                ClusterService cluster = clusterService.get();
                Build build = Build.current();
                XContentBuilder json = channel.newBuilder();
                if (request.hasParam("pretty") == false) {
                    json.prettyPrint();
                }
                json.startObject();
                json.field("name", cluster.getNodeName());
                json.field("cluster_name", cluster.getClusterName().value());
                json.field("cluster_uuid", cluster.state().metadata().clusterUUID());
                json.startObject("version");
                json.field("number", build.qualifiedVersion());
                json.field("build_flavor", build.flavor());
                json.field("build_type", build.type().displayName());
                json.field("build_hash", build.hash());
                json.field("build_date", build.date());
                json.field("build_snapshot", build.isSnapshot());
                json.field("lucene_version", org.apache.lucene.util.Version.LATEST.toString());
                json.field("minimum_wire_compatibility_version", build.minWireCompatVersion());
                json.field("minimum_index_compatibility_version", build.minIndexCompatVersion());
                json.endObject();
                json.field("tagline", "You Know, for Search");
                json.endObject();
                channel.sendResponse(new RestResponse(RestStatus.OK, json));
            };
        }
    }
}
