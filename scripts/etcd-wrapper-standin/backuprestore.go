package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// backupRestore is the client side of backup-restore's HTTP API that etcd-wrapper uses
// (internal/brclient/brclient.go upstream).
type backupRestore struct {
	client *http.Client
	base   string
}

func newBackupRestore(c config) (*backupRestore, error) {
	host, _, ok := strings.Cut(c.brHostPort, ":")
	if !ok || strings.HasPrefix(c.brHostPort, "http:") || strings.HasPrefix(c.brHostPort, "https:") {
		return nil, fmt.Errorf("--backup-restore-host-port %q: want <host>:<port> without a scheme", c.brHostPort)
	}
	if host == "" {
		host = "localhost"
	}
	scheme, tlsConf := "http", &tls.Config{}
	if c.brTLS {
		if strings.TrimSpace(c.brCABundle) == "" {
			return nil, fmt.Errorf("--backup-restore-ca-cert-bundle-path is required with --backup-restore-tls-enabled")
		}
		pool, err := caPool(c.brCABundle)
		if err != nil {
			return nil, err
		}
		scheme, tlsConf = "https", &tls.Config{RootCAs: pool, ServerName: host}
	}
	return &backupRestore{
		client: &http.Client{Transport: &http.Transport{TLSClientConfig: tlsConf}, Timeout: time.Minute},
		base:   scheme + "://" + c.brHostPort,
	}, nil
}

// initialize runs the initialisation loop (internal/bootstrap/bootstrap.go: Run), then fetches
// the member's etcd configuration and returns the file it was written to.
func (b *backupRestore) initialize(ctx context.Context) (string, error) {
	for {
		status, err := b.get(ctx, "/initialization/status")
		if err != nil {
			log.Printf("initialization status: %v", err)
		}
		log.Printf("initialization status: %q", status)
		if status == "Successful" {
			break
		}
		if status == "New" {
			mode := validationMode()
			log.Printf("triggering initialization, validation mode %s", mode)
			if _, err := b.get(ctx, "/initialization/start?mode="+mode); err != nil {
				log.Printf("triggering initialization: %v", err)
			}
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(time.Second):
		}
	}
	// Five tries a second apart, as tryGetEtcdConfig upstream.
	var lastErr error
	for try := 0; try < 5; try++ {
		cfg, err := b.get(ctx, "/config")
		if err == nil {
			return writeConfig(cfg)
		}
		lastErr = err
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(time.Second):
		}
	}
	return "", fmt.Errorf("etcd configuration from backup-restore: %w", lastErr)
}

// validationMode: "sanity" after a graceful exit (the exit-code file says "terminated" or
// "interrupt"), "full" otherwise (determineValidationMode upstream, which also removes the
// legacy validation_marker of etcd-custom-image).
func validationMode() string {
	_ = os.Remove("/var/etcd/data/validation_marker")
	data, err := os.ReadFile(exitCodeFile)
	if err == nil {
		if s := strings.TrimSpace(string(data)); s == "terminated" || s == "interrupt" {
			return "sanity"
		}
	}
	return "full"
}

func writeConfig(cfg string) (string, error) {
	home, err := os.UserHomeDir()
	if err != nil {
		return "", err
	}
	path := filepath.Join(home, "etcd.conf.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		return "", err
	}
	log.Printf("etcd configuration written to %s", path)
	return path, nil
}

func (b *backupRestore) get(ctx context.Context, path string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, b.base+path, nil)
	if err != nil {
		return "", err
	}
	resp, err := b.client.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	switch resp.StatusCode {
	case http.StatusOK, http.StatusCreated, http.StatusAccepted:
		return string(body), nil
	}
	return "", fmt.Errorf("GET %s: %s", path, resp.Status)
}

func caPool(path string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	return pool, nil
}
