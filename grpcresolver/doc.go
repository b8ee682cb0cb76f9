// Package grpcresolver is a grpc-go resolver over gracekit's service
// discovery, for gRPC clients that do not use go-kit endpoints: a target
// "gracekit:///quote" resolves to the instances of service quote that a
// consumer.Consumer's sd.Instancer publishes, complete sets only.
//
//	sess, _ := sd.NewSession("zk1:2181,zk2:2181,zk3:2181")
//	c, _ := consumer.New(sess)
//	if err := c.Start(ctx); err != nil { ... }
//	defer c.Stop(context.Background()) // after the ClientConns closed
//	b, _ := grpcresolver.NewBuilder(c)
//	conn, err := grpc.NewClient("gracekit:///quote",
//		grpc.WithResolvers(b),
//		grpc.WithTransportCredentials(insecure.NewCredentials()),
//		grpc.WithDefaultServiceConfig(`{"loadBalancingConfig":[{"round_robin":{}}],"healthCheckConfig":{"serviceName":""}}`))
//
// The service config spreads calls over every instance (round_robin) and
// has each subchannel watch the server's standard health service
// (healthCheckConfig), so that an instance leaves rotation at the first
// step of its stop, when grpcstop.Health turns it NOT_SERVING, before
// discovery has even changed. Client health checking needs
//
//	import _ "google.golang.org/grpc/health"
//
// in the client's binary; without it healthCheckConfig is ignored. The
// servers register the health service (health.NewServer) and keep it in
// step with their stop (grpcstop.Health).
//
// The ensemble belongs in the Builder, through its Consumer, never in the
// target: Go 1.26 rejects commas in a URL authority, and a target with an
// authority, or without a service name, gets a *TargetError.
//
// What is pushed, and when:
//   - Each instance becomes one resolver.Endpoint with one resolver.Address
//     (host:port, the plain port, else the SSL one); State carries both
//     Endpoints and Addresses. The instance (id, metadata, ports,
//     registration) is in the Attributes of both: InstanceFromAddress and
//     InstanceFromEndpoint read it back.
//   - OUT_OF_SERVICE instances are not in the set (the Instancer drops
//     them), and a gateway's flush takes an instance out at once: the
//     flush evicts it at the Instancer, whose new set the resolver pushes.
//     A gateway that routes only through this package uses the Builder's
//     FlushHandler (or Evicter), since the Consumer's own lookup routes
//     only the services it built endpoints for.
//   - A discovery error (ZooKeeper unreachable, sd.ErrDisconnected, a read
//     error) never pushes anything: the last set pushed stays and the error
//     goes to ClientConn.ReportError, and grpc-go keeps using a previous
//     good update on a resolver error (grpc-go#7749). RPCs go on reaching
//     the live servers while ZooKeeper is down.
//   - A service read without error and found empty is pushed empty, so that
//     RPCs fail fast with UNAVAILABLE (or wait, with grpc.WaitForReady)
//     instead of reaching instances that are out of service or flushed.
//     The exception is an empty set right after an error cleared
//     (RecoveryHold): providers whose sessions expired during the outage
//     are about to register again, so it is held back for a while.
//   - Before the first load there is nothing to push; a load that fails
//     within LoadTimeout is reported and tried again. A consumer with a
//     snapshot (consumer.WithSnapshot) that ZooKeeper does not answer
//     serves the service's snapshot after its start wait, and so do its
//     ClientConns, without reporting an error, until the first live read
//     replaces it (docs/STATIC-STABILITY.md); LoadTimeout must be longer
//     than that wait.
//   - ResolveNow is a resync hint; it never blocks.
//
// A resolver runs one goroutine, which Close stops and waits for. The
// Consumer shares one Instancer per service between all resolvers and
// endpoints; closing a ClientConn does not stop it.
package grpcresolver
