package consumer

// Returns is returns, for the tests of the return counts.
var Returns = returns
