package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"log"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
)

// readiness is the wrapper's HTTP server (internal/app/readycheck.go upstream): /readyz says
// whether a read through etcd's own client URL succeeds, /stop (POST) stops the wrapper.
type readiness struct {
	client   *clientv3.Client
	server   *http.Server
	certFile string
	keyFile  string
	ready    atomic.Bool
}

func newReadiness(ctx context.Context, c config, cfg *embed.Config) (*readiness, error) {
	tlsInfo := cfg.ClientTLSInfo
	useTLS := strings.TrimSpace(tlsInfo.CertFile) != "" && strings.TrimSpace(tlsInfo.KeyFile) != "" &&
		strings.TrimSpace(tlsInfo.TrustedCAFile) != ""
	scheme, tlsConf := "http", (*tls.Config)(nil)
	if useTLS {
		pool, err := caPool(tlsInfo.TrustedCAFile)
		if err != nil {
			return nil, err
		}
		tlsConf = &tls.Config{RootCAs: pool, ServerName: c.serverName}
		if c.clientCert != "" {
			pair, err := tls.LoadX509KeyPair(c.clientCert, c.clientKey)
			if err != nil {
				return nil, err
			}
			tlsConf.Certificates = []tls.Certificate{pair}
		}
		scheme = "https"
	}
	cli, err := clientv3.New(clientv3.Config{
		Context:     ctx,
		Endpoints:   []string{fmt.Sprintf("%s://%s:%d", scheme, c.serverName, c.clientPort)},
		DialTimeout: 5 * time.Second,
		TLS:         tlsConf,
	})
	if err != nil {
		return nil, err
	}
	r := &readiness{client: cli}
	if useTLS {
		r.certFile, r.keyFile = tlsInfo.CertFile, tlsInfo.KeyFile
	}
	r.server = &http.Server{Addr: fmt.Sprintf(":%d", c.wrapperPort), ReadHeaderTimeout: 5 * time.Second}
	return r, nil
}

// poll reads "foo" every 2 s with a 5 s timeout, as queryAndUpdateEtcdReadiness.
func (r *readiness) poll(ctx context.Context) {
	tick := time.NewTicker(2 * time.Second)
	defer tick.Stop()
	for {
		getCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := r.client.Get(getCtx, "foo")
		cancel()
		if err != nil && ctx.Err() == nil {
			log.Printf("readiness: %v", err)
		}
		r.ready.Store(err == nil)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

func (r *readiness) serve(stop context.CancelFunc) {
	mux := http.NewServeMux()
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if r.ready.Load() {
			w.WriteHeader(http.StatusOK)
			return
		}
		w.WriteHeader(http.StatusServiceUnavailable)
	})
	mux.HandleFunc("/stop", func(w http.ResponseWriter, req *http.Request) {
		if req.Method != http.MethodPost {
			return
		}
		log.Print("received a stop request")
		stop()
		w.WriteHeader(http.StatusOK)
	})
	r.server.Handler = mux
	var err error
	if r.certFile != "" {
		err = r.server.ListenAndServeTLS(r.certFile, r.keyFile)
	} else {
		err = r.server.ListenAndServe()
	}
	if err != nil && err != http.ErrServerClosed {
		log.Fatalf("wrapper server: %v", err)
	}
}

func (r *readiness) close() {
	_ = r.server.Close()
	_ = r.client.Close()
}
