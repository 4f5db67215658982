// Package doors holds the test that every front door gives the same answer
// for the same token: the HTTP API and the control queue, each over its own
// but identical store, driven through one table of principal × action.
package doors
