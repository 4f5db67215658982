package store

// SettleRowsSQL lets the plan test EXPLAIN the settlement's statement.
const SettleRowsSQL = settleRowsSQL

// SchemaLockID lets the tests hold a schema's migration lock.
var SchemaLockID = schemaLockID
