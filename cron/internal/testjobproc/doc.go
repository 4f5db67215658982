// Command testjobproc runs the cron service's cleanup job as its own
// process, so tests can pause it (SIGSTOP) or kill it (SIGKILL) while it
// holds the job's lease and check, in the database, that a former holder
// cannot write once another instance has taken over. It is built and run
// by the fencing tests of package cron only.
package main
