package store

// SettleRowsSQL lets the plan test EXPLAIN the settlement's statement.
const SettleRowsSQL = settleRowsSQL
