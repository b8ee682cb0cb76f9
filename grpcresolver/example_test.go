package grpcresolver_test

import (
	"context"
	"log"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	_ "google.golang.org/grpc/health" // client health checking (healthCheckConfig)

	"github.com/gracekit/gracekit/consumer"
	"github.com/gracekit/gracekit/grpcresolver"
	"github.com/gracekit/gracekit/sd"
)

// A plain grpc-go client of service quote: round robin over its
// instances, each watched through the standard health service, so that an
// instance leaves rotation at the first step of its stop. (Not run: it
// needs a ZooKeeper ensemble.)
func ExampleNewBuilder() {
	sess, err := sd.NewSession("zk1:2181,zk2:2181,zk3:2181")
	if err != nil {
		log.Fatal(err)
	}
	c, err := consumer.New(sess)
	if err != nil {
		log.Fatal(err)
	}
	if err := c.Start(context.Background()); err != nil {
		log.Fatal(err)
	}
	defer c.Stop(context.Background()) // after the ClientConn closed

	b, err := grpcresolver.NewBuilder(c)
	if err != nil {
		log.Fatal(err)
	}
	conn, err := grpc.NewClient("gracekit:///quote",
		grpc.WithResolvers(b),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultServiceConfig(`{"loadBalancingConfig":[{"round_robin":{}}],"healthCheckConfig":{"serviceName":""}}`))
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	// quotepb.NewQuoteClient(conn).Get(ctx, req) ...
}
