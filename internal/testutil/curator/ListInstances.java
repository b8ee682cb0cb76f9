// A stock Apache Curator x-discovery client, as Spring Cloud Zookeeper
// configures it. Given the connect string, it reads queries from stdin,
// one "basePath service" per line, and answers each with
// ServiceDiscovery.queryForInstances: one line per instance
// (id address port sslPort status), or "ERROR <exception>" when the query
// fails, then "END". testutil.Curator runs it with Java's source launcher;
// one process answers a test's queries (a JVM start is seconds under load).
//
// The package is Spring's so that the payload class Spring writes, and
// gracekit writes byte for byte, exists here as in a Spring service.
package org.springframework.cloud.zookeeper.discovery;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.util.Collection;
import java.util.Map;
import java.util.concurrent.TimeUnit;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.retry.RetryOneTime;
import org.apache.curator.x.discovery.ServiceDiscovery;
import org.apache.curator.x.discovery.ServiceDiscoveryBuilder;
import org.apache.curator.x.discovery.ServiceInstance;
import org.apache.curator.x.discovery.details.JsonInstanceSerializer;

public class ListInstances {
    public static void main(String[] args) throws Exception {
        // Jackson resolves the payload's @class through the context class
        // loader; the source launcher's classes are in its own.
        Thread.currentThread().setContextClassLoader(ListInstances.class.getClassLoader());
        try (CuratorFramework client = CuratorFrameworkFactory.newClient(args[0], 10000, 5000, new RetryOneTime(200))) {
            client.start();
            if (!client.blockUntilConnected(20, TimeUnit.SECONDS)) {
                System.out.println("ERROR not connected to " + args[0]);
                System.out.println("END");
                System.exit(2);
            }
            BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
            for (String line; (line = in.readLine()) != null; ) {
                String[] q = line.trim().split(" ");
                query(client, q[0], q[1]);
                System.out.println("END");
                System.out.flush();
            }
        }
    }

    static void query(CuratorFramework client, String basePath, String service) throws Exception {
        ServiceDiscovery<ZookeeperInstance> discovery = ServiceDiscoveryBuilder.builder(ZookeeperInstance.class)
                .client(client).basePath(basePath)
                .serializer(new JsonInstanceSerializer<>(ZookeeperInstance.class))
                .build();
        discovery.start();
        try {
            Collection<ServiceInstance<ZookeeperInstance>> instances = discovery.queryForInstances(service);
            for (ServiceInstance<ZookeeperInstance> i : instances) {
                ZookeeperInstance p = i.getPayload();
                String status = p == null || p.getMetadata() == null ? "" : p.getMetadata().getOrDefault("instance_status", "");
                System.out.println(i.getId() + " " + i.getAddress() + " " + i.getPort() + " " + i.getSslPort() + " " + status);
            }
        } catch (Exception e) {
            System.out.println("ERROR " + e.toString().replace('\n', ' '));
        } finally {
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
