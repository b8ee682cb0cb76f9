package gwrun

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"time"
)

// ShutdownTimeout bounds Server.Wait's graceful shutdown.
const ShutdownTimeout = 5 * time.Second

// Server is an http.Server serving on a listener of its own.
type Server struct {
	srv    *http.Server
	served chan error
}

// Listen listens on port (every address) and serves srv there in a
// goroutine; Wait ends it.
func Listen(srv *http.Server, port int) (*Server, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort("", strconv.Itoa(port)))
	if err != nil {
		return nil, err
	}
	s := &Server{srv: srv, served: make(chan error, 1)}
	go func() { s.served <- srv.Serve(ln) }()
	return s, nil
}

// Wait blocks until the first signal on sigs or until serving fails. On
// the signal it stops relaying sigs (so that a second one kills the
// process), logs "stopping", and shuts the server down within
// ShutdownTimeout; it returns once the server has stopped.
func (s *Server) Wait(sigs chan os.Signal, log *slog.Logger) error {
	select {
	case sig := <-sigs:
		signal.Stop(sigs) // a second signal kills the process
		log.Info("stopping", "signal", sig.String())
	case err := <-s.served:
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), ShutdownTimeout)
	defer cancel()
	err := s.srv.Shutdown(ctx)
	if serr := <-s.served; !errors.Is(serr, http.ErrServerClosed) {
		err = errors.Join(err, serr)
	}
	return err
}
