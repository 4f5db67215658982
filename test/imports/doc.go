// Package imports holds the test that the imports between dlq's packages
// follow the dependency picture in docs/ARCHITECTURE.md ("Dependencies"):
// the table there is the rule, read by the test, so the picture and the
// code cannot drift apart.
package imports
