// Package tls tests dlq's TLS connections against servers started for
// the purpose (build tag tls, make test-tls; as root, like the fault
// tests, and alone): a RabbitMQ node with a TLS listener that asks for a
// client certificate, and a PostgreSQL cluster with ssl = on that accepts
// only TLS with a password, both on their own ports and data directories,
// stopped and removed at the end. The certificates are made by the test.
// dlq serve connects to both over TLS (amqps with a CA, a client
// certificate and a server name; sslmode=verify-full with sslrootcert),
// serves its API and console over HTTPS with a certificate it reloads on
// change and on SIGHUP, and refuses wrong CAs with a clear message.
package tls
