package fxmodule

import (
	"errors"
	"net/http"

	"go.uber.org/fx"

	"github.com/gracekit/gracekit/consumer"
	"github.com/gracekit/gracekit/provider"
	"github.com/gracekit/gracekit/sd"
	"github.com/gracekit/gracekit/shutdown/flush"
)

// Gateway is the module of a consumer that also accepts flushes: what
// Consumer is, plus a flush receiver. It needs Config.FlushSecret and,
// in the same app, Discovery, which serves the flush handler and registers
// the gateway; it provides:
//
//   - *consumer.Consumer, as Consumer does (use Gateway or Consumer, not
//     both);
//   - *flush.Handler: the flush receiver (consumer.Consumer.FlushHandler),
//     which Discovery serves at Config.FlushPath (default
//     DefaultFlushPath) on the app's *http.Server, next to the probes and
//     outside the Tracker, and whose path it registers in the gateway's
//     metadata (sd.MetadataFlushPath), so that providers listing the
//     gateway's service in Config.FlushGateways find it
//     (consumer.FlushURL).
//
// A signed flush request for a service evicts the registration it names
// (id and creation zxid) from the service's sd.Instancer, and then from
// every Endpointer that Consumer.Endpoint built for it, before it is
// answered 200; a registration the Instancer does not list is answered 202
// without evicting anything, and so is a service the consumer routes no
// endpoint to (flush.NotRouted). The handler accepts requests meant for
// http://Config.Address:port followed by Config.FlushPath, the URL
// providers discover (port as Discovery registers it), and
// Config.FlushAudiences.
//
// Without Discovery the app fails to build, with an error that says so: a
// gateway nobody can discover or reach would never be flushed. A process
// that accepts flushes on a server it runs itself uses Consumer and
// consumer.Consumer.FlushHandler.
var Gateway = fx.Module("gracekit.gateway",
	fx.Provide(newGateway, newFlushRoute),
	fx.Invoke(needDiscovery),
)

// flushRoute is the flush handler Discovery serves and registers.
type flushRoute struct {
	path    string
	handler *flush.Handler
}

func newGateway(p commonParams) (consumerResult, error) {
	// Gateway is built before Discovery, whose needs it names too; the
	// port is left to Discovery, which sees the server's Addr.
	needs := providerNeeds(p.Config, nil, false, true)
	if err := requireSet(needs...); err != nil {
		return consumerResult{}, err
	}
	s, err := p.Config.checkGateway()
	if err != nil {
		return consumerResult{}, err
	}
	c, err := s.newCalling(p)
	if err != nil {
		return consumerResult{}, err
	}
	return consumerResult{Consumer: c.consumer, Calling: c}, nil
}

type flushRouteParams struct {
	fx.In

	Common  commonParams
	Calling *calling
	Server  *http.Server
}

type flushRouteResult struct {
	fx.Out

	Handler *flush.Handler
	Route   *flushRoute
}

func newFlushRoute(p flushRouteParams) (flushRouteResult, error) {
	s, err := p.Common.Config.checkGateway()
	if err != nil {
		return flushRouteResult{}, err
	}
	port, _, err := s.listen(p.Server)
	if err != nil {
		return flushRouteResult{}, err
	}
	self := consumer.FlushURL(sd.Instance{Address: s.Address, Port: port, Metadata: map[string]string{sd.MetadataFlushPath: s.FlushPath}})
	h, err := p.Calling.consumer.FlushHandler([]byte(s.FlushSecret), append([]string{self}, s.FlushAudiences...), p.Common.Metrics.handlerOptions()...)
	if err != nil {
		return flushRouteResult{}, err
	}
	return flushRouteResult{Handler: h, Route: &flushRoute{path: s.FlushPath, handler: h}}, nil
}

type needDiscoveryParams struct {
	fx.In

	Provider *provider.Provider `optional:"true"`
}

// ErrGatewayNeedsDiscovery is the build error of an app with Gateway and
// without Discovery.
var ErrGatewayNeedsDiscovery = errors.New("fxmodule: Gateway needs Discovery in the same app, which serves its flush handler and registers it with its flush path; " +
	"add fxmodule.Discovery, or use fxmodule.Consumer and serve consumer.Consumer.FlushHandler yourself")

func needDiscovery(p needDiscoveryParams) error {
	if p.Provider == nil {
		return ErrGatewayNeedsDiscovery
	}
	return nil
}
