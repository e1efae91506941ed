package dev.esprovider.local;

import java.util.Collection;
import java.util.List;
import java.util.function.Predicate;
import java.util.function.Supplier;

import org.elasticsearch.cluster.node.DiscoveryNodes;
import org.elasticsearch.features.NodeFeature;
import org.elasticsearch.rest.RestHandler;

/** TEST STAND-IN for the unpublished rest-root/analysis-common modules (see LocalTestPluginBase): 9.x registration. */
public final class LocalTestPlugin extends LocalTestPluginBase {

    @Override
    public Collection<RestHandler> getRestHandlers(
        RestHandlersServices services,
        Supplier<DiscoveryNodes> nodesInCluster,
        Predicate<NodeFeature> clusterSupportsFeature
    ) {
        return List.of(rootHandler());
    }
}
