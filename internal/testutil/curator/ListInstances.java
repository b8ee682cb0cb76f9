// A stock Apache Curator x-discovery client, as Spring Cloud Zookeeper
// configures it: it lists a service's instances with
// ServiceDiscovery.queryForInstances and prints one line per instance
// (id address port sslPort status), or "ERROR <exception>" and exits 3 when the
// query fails. Run by testutil.CuratorList with Java's source launcher.
//
// The package is Spring's so that the payload class Spring writes, and
// gracekit writes byte for byte, exists here as in a Spring service.
package org.springframework.cloud.zookeeper.discovery;

import java.util.Collection;
import java.util.Map;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.retry.RetryOneTime;
import org.apache.curator.x.discovery.ServiceDiscovery;
import org.apache.curator.x.discovery.ServiceDiscoveryBuilder;
import org.apache.curator.x.discovery.ServiceInstance;
import org.apache.curator.x.discovery.details.JsonInstanceSerializer;

public class ListInstances {
    public static void main(String[] args) throws Exception {
        String connect = args[0], basePath = args[1], service = args[2];
        // Jackson resolves the payload's @class through the context class
        // loader; the source launcher's classes are in its own.
        Thread.currentThread().setContextClassLoader(ListInstances.class.getClassLoader());
        try (CuratorFramework client = CuratorFrameworkFactory.newClient(connect, 10000, 5000, new RetryOneTime(200))) {
            client.start();
            if (!client.blockUntilConnected(10, java.util.concurrent.TimeUnit.SECONDS)) {
                System.out.println("ERROR not connected to " + connect);
                System.exit(2);
            }
            ServiceDiscovery<ZookeeperInstance> discovery = ServiceDiscoveryBuilder.builder(ZookeeperInstance.class)
                    .client(client).basePath(basePath)
                    .serializer(new JsonInstanceSerializer<>(ZookeeperInstance.class))
                    .build();
            discovery.start();
            Collection<ServiceInstance<ZookeeperInstance>> instances;
            try {
                instances = discovery.queryForInstances(service);
            } catch (Exception e) {
                System.out.println("ERROR " + e);
                System.exit(3);
                return;
            }
            for (ServiceInstance<ZookeeperInstance> i : instances) {
                ZookeeperInstance p = i.getPayload();
                String status = p == null || p.getMetadata() == null ? "" : p.getMetadata().getOrDefault("instance_status", "");
                System.out.println(i.getId() + " " + i.getAddress() + " " + i.getPort() + " " + i.getSslPort() + " " + status);
            }
            discovery.close();
        }
    }
}

// Spring Cloud Zookeeper's payload, with the fields it serializes.
class ZookeeperInstance {
    private String id;
    private String name;
    private Map<String, String> metadata;

    public String getId() { return id; }
    public void setId(String id) { this.id = id; }
    public String getName() { return name; }
    public void setName(String name) { this.name = name; }
    public Map<String, String> getMetadata() { return metadata; }
    public void setMetadata(Map<String, String> metadata) { this.metadata = metadata; }
}
