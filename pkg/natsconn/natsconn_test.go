package natsconn_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/tenaz/tenaz/pkg/config"
	"github.com/tenaz/tenaz/pkg/natsconn"
	"github.com/tenaz/tenaz/pkg/natsd"
	"github.com/tenaz/tenaz/pkg/natstest"
)

// start runs an embedded server with auth a and options adjusted by
// configure; it stops when the test ends.
func start(t *testing.T, a natsd.Auth, configure func(*server.Options)) *server.Server {
	t.Helper()
	srv, err := natsd.Start(natsd.Options{StoreDir: t.TempDir(), Auth: a, Configure: configure})
	if err != nil {
		t.Fatalf("natsd.Start: %v", err)
	}
	t.Cleanup(func() { natsd.Shutdown(srv) })
	return srv
}

// connect is natsconn.Connect as a service calls it; the connection closes
// when the test ends.
func connect(t *testing.T, c config.NATS, url string) (*nats.Conn, error) {
	t.Helper()
	nc, err := natsconn.Connect(c, "test", url)
	if err == nil {
		t.Cleanup(nc.Close)
	}
	return nc, err
}

// mustWork asserts that c connects to url and can do a request round trip.
func mustWork(t *testing.T, what string, c config.NATS, url string) {
	t.Helper()
	nc, err := connect(t, c, url)
	if err != nil {
		t.Fatalf("%s: want a connection, got %v", what, err)
	}
	sub, err := nc.Subscribe("ping", func(m *nats.Msg) { _ = m.Respond([]byte("pong")) })
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if m, err := nc.Request("ping", nil, 5*time.Second); err != nil || string(m.Data) != "pong" {
		t.Fatalf("%s: want a round trip, got %v", what, err)
	}
}

// mustRefuse asserts that c is refused at once, with an error (not a
// connection that retries forever in the background).
func mustRefuse(t *testing.T, what string, c config.NATS, url string) {
	t.Helper()
	nc, err := connect(t, c, url)
	if err == nil {
		t.Fatalf("%s: want the connection refused, got one (connected %v)", what, nc.IsConnected())
	}
}

func writeFile(t *testing.T, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestUserPassword(t *testing.T) {
	t.Parallel()
	srv := start(t, natsd.Auth{User: "tenaz", Password: "s3cret-pw"}, nil)
	mustWork(t, "right user and password", config.NATS{User: "tenaz", Password: "s3cret-pw"}, srv.ClientURL())
	mustRefuse(t, "wrong password", config.NATS{User: "tenaz", Password: "guess"}, srv.ClientURL())
	mustRefuse(t, "wrong user", config.NATS{User: "admin", Password: "s3cret-pw"}, srv.ClientURL())
	mustRefuse(t, "no credentials", config.NATS{}, srv.ClientURL())
}

func TestToken(t *testing.T) {
	t.Parallel()
	srv := start(t, natsd.Auth{Token: "t0ken-abc"}, nil)
	mustWork(t, "right token", config.NATS{Token: "t0ken-abc"}, srv.ClientURL())
	mustRefuse(t, "forged token", config.NATS{Token: "t0ken-abd"}, srv.ClientURL())
	mustRefuse(t, "no token", config.NATS{}, srv.ClientURL())
}

func userSeed(t *testing.T) (path, public string) {
	t.Helper()
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	seed, _ := kp.Seed()
	pub, _ := kp.PublicKey()
	return writeFile(t, "user.nk", seed), pub
}

func TestNKey(t *testing.T) {
	t.Parallel()
	seedFile, _ := userSeed(t)
	// The embedded server takes the public key from the same config the
	// clients use.
	a, err := natsd.ClientAuth(config.NATS{NKeySeedFile: seedFile})
	if err != nil || !strings.HasPrefix(a.NKey, "U") {
		t.Fatalf("ClientAuth: want a user public key, got %+v, %v", a, err)
	}
	srv := start(t, a, nil)
	mustWork(t, "the configured nkey", config.NATS{NKeySeedFile: seedFile}, srv.ClientURL())
	other, _ := userSeed(t)
	mustRefuse(t, "another nkey", config.NATS{NKeySeedFile: other}, srv.ClientURL())
	mustRefuse(t, "no nkey", config.NATS{}, srv.ClientURL())
	if _, err := natsconn.Connect(config.NATS{NKeySeedFile: writeFile(t, "bad.nk", []byte("SUnot-a-seed"))}, "x", srv.ClientURL()); err == nil || !strings.Contains(err.Error(), "nats.nkey_seed_file") {
		t.Fatalf("a broken seed file: want an error naming nats.nkey_seed_file, got %v", err)
	}
}

// operatorSetup is decentralized (JWT) auth as a NATS operator runs it:
// an operator, a system account and an application account, both signed
// by the operator, and a user of the application account.
type operatorSetup struct {
	operator *jwt.OperatorClaims
	resolver *server.MemAccResolver
	sysPub   string
	account  nkeys.KeyPair
}

func newOperator(t *testing.T) *operatorSetup {
	t.Helper()
	okp, _ := nkeys.CreateOperator()
	opub, _ := okp.PublicKey()
	oc := jwt.NewOperatorClaims(opub)
	oc.Name = "tenaz-test"
	if _, err := oc.Encode(okp); err != nil {
		t.Fatal(err)
	}
	o := &operatorSetup{operator: oc, resolver: &server.MemAccResolver{}}
	addAccount := func(name string) (nkeys.KeyPair, string) {
		akp, _ := nkeys.CreateAccount()
		apub, _ := akp.PublicKey()
		ac := jwt.NewAccountClaims(apub)
		ac.Name = name
		ajwt, err := ac.Encode(okp)
		if err != nil {
			t.Fatal(err)
		}
		if err := o.resolver.Store(apub, ajwt); err != nil {
			t.Fatal(err)
		}
		return akp, apub
	}
	_, o.sysPub = addAccount("SYS")
	o.account, _ = addAccount("TENAZ")
	return o
}

// creds writes a credentials file for a new user signed by account.
func creds(t *testing.T, account nkeys.KeyPair) string {
	t.Helper()
	ukp, _ := nkeys.CreateUser()
	upub, _ := ukp.PublicKey()
	uc := jwt.NewUserClaims(upub)
	ujwt, err := uc.Encode(account)
	if err != nil {
		t.Fatal(err)
	}
	seed, _ := ukp.Seed()
	b, err := jwt.FormatUserConfig(ujwt, seed)
	if err != nil {
		t.Fatal(err)
	}
	return writeFile(t, "user.creds", b)
}

func TestCredsFile(t *testing.T) {
	t.Parallel()
	o := newOperator(t)
	srv := start(t, natsd.Auth{}, func(opts *server.Options) {
		opts.JetStream = false // JetStream under an operator needs account limits; not what is tested here
		opts.TrustedOperators = []*jwt.OperatorClaims{o.operator}
		opts.AccountResolver = o.resolver
		opts.SystemAccount = o.sysPub
	})
	mustWork(t, "a user of a trusted account", config.NATS{Creds: creds(t, o.account)}, srv.ClientURL())
	// A user signed by an account the operator never signed.
	rogue, _ := nkeys.CreateAccount()
	mustRefuse(t, "a user of a forged account", config.NATS{Creds: creds(t, rogue)}, srv.ClientURL())
	// A valid user JWT with someone else's seed: the signature of the
	// server's nonce does not match.
	good := creds(t, o.account)
	b, _ := os.ReadFile(good)
	other, _ := nkeys.CreateUser()
	otherSeed, _ := other.Seed()
	userJWT, _ := jwt.ParseDecoratedJWT(b)
	stolen, _ := jwt.FormatUserConfig(userJWT, otherSeed)
	mustRefuse(t, "a user JWT with the wrong seed", config.NATS{Creds: writeFile(t, "stolen.creds", stolen)}, srv.ClientURL())
	mustRefuse(t, "no credentials", config.NATS{}, srv.ClientURL())
}

// pki is a CA with a server certificate for 127.0.0.1 and a client
// certificate, written as PEM files.
type pki struct {
	ca, serverCert, serverKey, clientCert, clientKey string
	caPool                                           *x509.CertPool
}

func newPKI(t *testing.T) pki {
	t.Helper()
	dir := t.TempDir()
	write := func(name, typ string, der []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "tenaz test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true,
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	leaf := func(name string, serial int64, usage x509.ExtKeyUsage) (string, string) {
		k, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
			IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"}}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &k.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		kd, _ := x509.MarshalECPrivateKey(k)
		return write(name+".pem", "CERTIFICATE", der), write(name+"-key.pem", "EC PRIVATE KEY", kd)
	}
	p := pki{ca: write("ca.pem", "CERTIFICATE", caDER), caPool: x509.NewCertPool()}
	p.caPool.AddCert(caCert)
	p.serverCert, p.serverKey = leaf("server", 2, x509.ExtKeyUsageServerAuth)
	p.clientCert, p.clientKey = leaf("client", 3, x509.ExtKeyUsageClientAuth)
	return p
}

// TLS with a client certificate (mutual TLS): the server verifies the
// client, the client verifies the server against the configured CA.
func TestTLS(t *testing.T) {
	t.Parallel()
	p := newPKI(t)
	srv := start(t, natsd.Auth{}, func(opts *server.Options) {
		cert, err := tls.LoadX509KeyPair(p.serverCert, p.serverKey)
		if err != nil {
			t.Fatal(err)
		}
		opts.TLS, opts.TLSVerify = true, true
		opts.TLSConfig = &tls.Config{Certificates: []tls.Certificate{cert}, ClientCAs: p.caPool,
			ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12}
	})
	url := strings.Replace(srv.ClientURL(), "nats://", "tls://", 1)
	good := config.NATS{TLS: config.TLS{CA: p.ca, Cert: p.clientCert, Key: p.clientKey}}
	mustWork(t, "the right CA and client certificate", good, url)

	other := newPKI(t) // a CA the server does not trust, and that does not know the server
	mustRefuse(t, "a client certificate from another CA", config.NATS{TLS: config.TLS{CA: p.ca, Cert: other.clientCert, Key: other.clientKey}}, url)
	mustRefuse(t, "a server the client's CA did not sign", config.NATS{TLS: config.TLS{CA: other.ca, Cert: p.clientCert, Key: p.clientKey}}, url)
	mustRefuse(t, "no client certificate", config.NATS{TLS: config.TLS{CA: p.ca}}, url)
	mustRefuse(t, "no TLS at all", config.NATS{}, srv.ClientURL())
}

// A server that is not up yet is waited for: Connect returns at once and
// the connection comes up when the server does.
func TestWaitsForServer(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	nc, err := connect(t, config.NATS{}, "nats://"+addr)
	if err != nil {
		t.Fatalf("want Connect to wait for a server that is down, got %v", err)
	}
	srv, err := natsd.Start(natsd.Options{StoreDir: t.TempDir(), Listen: addr})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { natsd.Shutdown(srv) })
	natstest.Eventually(t, 10*time.Second, nc.IsConnected, "the connection to come up with the server")
}

// An error never shows the password or token of a URL.
func TestConnectErrorRedactsURL(t *testing.T) {
	t.Parallel()
	srv := start(t, natsd.Auth{User: "u", Password: "right"}, nil)
	host := strings.TrimPrefix(srv.ClientURL(), "nats://")
	for _, u := range []string{"nats://u:wrong-pw-123@" + host, "nats://tok-secret-123@" + host} {
		_, err := natsconn.Connect(config.NATS{}, "x", u)
		if err == nil {
			t.Fatalf("%s: want refused", u)
		}
		if strings.Contains(err.Error(), "wrong-pw-123") || strings.Contains(err.Error(), "tok-secret-123") {
			t.Fatalf("the error shows a secret: %v", err)
		}
		if !errors.Is(err, nats.ErrAuthorization) && !strings.Contains(strings.ToLower(err.Error()), "authorization") {
			t.Fatalf("want an authorization error, got %v", err)
		}
	}
}
