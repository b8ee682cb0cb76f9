// Package fxmodule adds gracekit to an fx application. It is thin glue
// over the plain-Go packages provider and consumer, in three roles that
// compose:
//
//   - Discovery, the provider: registers the app's *http.Server in
//     ZooKeeper, serves it, and stops it without failed requests
//     (*provider.Provider);
//   - Consumer: calls other services through load-balanced, retrying
//     endpoints (*consumer.Consumer); needs no flush secret;
//   - Gateway: a consumer that also accepts flushes (*consumer.Consumer
//     and *flush.Handler); used with Discovery, which serves the flush
//     handler and registers its path.
//
// A service that serves and calls others uses Discovery and Consumer; a
// gateway uses Discovery and Gateway. Roles in one app share one ZooKeeper
// session. Each module appends its own hooks, so an fx.Invoke is only
// needed to use what it provides:
//
//	fx.New(
//		fxmodule.FromEnv(),                 // or fx.Supply(fxmodule.Config{...})
//		fx.Provide(newServer),              // returns the app's *http.Server
//		fxmodule.Discovery,
//		fxmodule.Consumer,                  // if it calls other services
//	).Run()
//
// Constructors do no I/O: a failed fx.New leaves nothing running. OnStart
// hooks connect to ZooKeeper, within fx's start deadline; OnStop hooks
// stop within fx's stop deadline. The consumer starts before the provider
// and stops after it, so that requests in flight during the drain can
// still call out.
//
// # Configuration
//
// Config is plain data. In an fx app, FromEnv provides it from these
// environment variables (and sets fx's stop timeout from
// GRACEKIT_STOP_TIMEOUT); ConfigFromEnv reads the same variables for code
// without fx. A field left zero takes the default shown; a role whose
// required settings are unset fails with a *ConfigError naming them all. Consumer reads
// only the GRACEKIT_ZK_* variables, GRACEKIT_BASE_PATH and the slow start's
// and snapshot's; Gateway also
// reads GRACEKIT_FLUSH_SECRET, GRACEKIT_FLUSH_PATH and
// GRACEKIT_FLUSH_AUDIENCES; Discovery reads the others.
//
//	variable                        Config field        default
//	GRACEKIT_ZK_SERVERS             ZKServers           required: "host:port,...[/chroot]"
//	GRACEKIT_ZK_SESSION_TIMEOUT     ZKSessionTimeout    10s (sd.DefaultSessionTimeout)
//	GRACEKIT_ZK_AUTH                ZKAuth              none; "user:password" for digest auth
//	GRACEKIT_ZK_TLS_CA              ZKTLSCA             none; PEM CA bundle: any GRACEKIT_ZK_TLS_* set connects with TLS
//	GRACEKIT_ZK_TLS_CERT            ZKTLSCert           none; PEM client certificate (ssl.clientAuth=need)
//	GRACEKIT_ZK_TLS_KEY             ZKTLSKey            none; its PEM key
//	GRACEKIT_ZK_TLS_SERVER_NAME     ZKTLSServerName     each server's host: checked against its certificate
//	GRACEKIT_ZK_TLS_MIN_VERSION     ZKTLSMinVersion     1.2; or 1.3
//	GRACEKIT_ZK_SASL_USER           ZKSASLUser          none; SASL DIGEST-MD5 user (docs/SECURITY.md)
//	GRACEKIT_ZK_SASL_PASSWORD       ZKSASLPassword      none; required with ZKSASLUser
//	GRACEKIT_BASE_PATH              BasePath            /services
//	GRACEKIT_SERVICE                Service             required
//	GRACEKIT_INSTANCE_ID            InstanceID          a random UUID
//	GRACEKIT_ADDRESS                Address             required: the address others reach us at
//	GRACEKIT_PORT                   Port                registered, and listened on unless Server.Addr is set; 0 takes Server.Addr's port
//	GRACEKIT_GRPC_PORT              GRPCPort            required with a *grpc.Server: listened on, registered in metadata gRPC_port
//	GRACEKIT_METADATA               Metadata            none; "key=value,key=value"
//	GRACEKIT_FLUSH_SECRET           FlushSecret         none; >= 16 bytes, required by Gateway and with signed flush targets
//	GRACEKIT_FLUSH_TARGETS          FlushTargets        none; comma-separated flush URLs (signed POST)
//	GRACEKIT_SPRING_FLUSH_TARGETS   SpringFlushTargets  none; comma-separated Spring-style flush URLs (GET)
//	GRACEKIT_FLUSH_GATEWAYS         FlushGateways       none; comma-separated gateway service names
//	GRACEKIT_FLUSH_PATH             FlushPath           /gracekit/flush (Gateway only)
//	GRACEKIT_FLUSH_AUDIENCES        FlushAudiences      none; comma-separated other URLs of the flush handler (Gateway only)
//	GRACEKIT_QUIET_WINDOW           QuietWindow         250ms (shutdown.DefaultQuietWindow)
//	GRACEKIT_MAX_QUIESCE            MaxQuiesce          2s (shutdown.DefaultMaxQuiesce)
//	GRACEKIT_DRAIN_TIMEOUT          DrainTimeout        4s (shutdown.DefaultDrainTimeout)
//	GRACEKIT_STOP_TIMEOUT           StopTimeout         15s (fx.DefaultTimeout)
//	GRACEKIT_SLOW_START             NoSlowStart         on; off turns slow start off (Consumer, Gateway)
//	GRACEKIT_SLOW_START_WINDOW      SlowStartWindow     30s (DefaultSlowStartWindow)
//	GRACEKIT_SLOW_START_AGGRESSION  SlowStartAggression 1 (linear)
//	GRACEKIT_SLOW_START_MIN_WEIGHT  SlowStartMinWeight  0.1
//	GRACEKIT_SNAPSHOT_DIR           SnapshotDir         none: no snapshot (docs/STATIC-STABILITY.md)
//	GRACEKIT_SNAPSHOT_START_WAIT    SnapshotStartWait   3s (consumer.DefaultSnapshotStartWait)
//	GRACEKIT_SNAPSHOT_MAX_AGE       SnapshotMaxAge      24h (consumer.DefaultSnapshotMaxAge)
//	GRACEKIT_SNAPSHOT_READINESS     SnapshotRequireLive ready; require-live: not ready while serving a snapshot
//
// Durations are Go durations ("250ms", "2s"). fx does not tell a module the
// app's stop timeout, so StopTimeout must repeat the value given to
// fx.StopTimeout (the option StopTimeout sets both): the stop sequence's
// bounds (out of service, deregister, flush, quiesce, drain, close; 14.4 s
// with the defaults) are checked against it when the app is built.
//
// # Deadlines
//
// fx gives up on a hook at its start or stop timeout: a late result is
// lost, and after a stop the process exits. So the module takes its bounds
// from fx's deadlines. Each start step ends a margin before the start
// deadline, so that a failed registration is reported as itself, such as
// an *sd.ConflictError naming the node and the session that holds it. At
// stop, unready, deregister, drain and closing the session always run and
// finish before the stop deadline: when fx's deadline leaves less than the
// sequence's bounds, they share it in proportion to their bounds, the
// other steps (out of service, flush, quiesce) get only what is left or
// are skipped, and the hook logs a warning. Requests still in flight when
// the drain's bound ends are cut; the provider's Report counts them
// (CutByDrain) and the stop error includes a *shutdown.DrainError.
//
// A bad value makes the app fail to build (fx.New's error, returned again
// by Start) with a *ConfigError naming the field, its environment variable
// and what is allowed. Nothing has connected by then.
//
// # Flush targets
//
// At stop, a provider asks every flush target to evict it: the URLs of
// FlushTargets and SpringFlushTargets, and, for each service named in
// FlushGateways, every registered instance that has sd.MetadataFlushPath
// in its metadata, at http://address:port followed by that path
// (consumer.FlushURL). Gateways register so (see Gateway); the provider
// watches their services from its start, through the app's consumer if it
// has one, so the list is current when it stops.
//
// # Logging
//
// An optional *slog.Logger in the container (fx.Supply(logger)) receives
// the lifecycle events of the start and stop steps, through
// lifecycle.SlogListener, and the logs of provider, consumer, sd, endpoint
// and shutdown. Without one they go to slog.Default(). fx's own logger (fx.WithLogger) reports the
// module's hooks as it does any hook; Logger is one over the same *slog.Logger that keeps fx's
// events at debug, says the stop signal at info and a failed hook once at error, and leaves what
// fx.New failed on to App.Err: check it before Run and print Cause(err), which is the
// *ConfigError itself when a setting is unset or wrong, said once, without fx's wrapping.
package fxmodule
