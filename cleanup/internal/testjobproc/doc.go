// Command testjobproc runs the cleanup job of package cleanup as its own
// process, so tests can pause it (SIGSTOP) or kill it (SIGKILL) while it
// holds the job's lease and check, in the database, that a former holder
// cannot write once another instance has taken over. It is built and run
// by cleanup's tests only.
package main
