// Package deploy holds dlq's deployment files, and the checks that keep
// them true to the code: the Prometheus alert rules (prometheus/alerts.yml,
// with their promtool unit tests) and the Grafana dashboard
// (grafana/dlq.json) must parse and query only metrics dlq exports, which
// rules_test.go verifies against the metric names in the sources and a
// live registry. The package has no code of its own.
package deploy
