package store

// SettleRowsSQL lets the plan test EXPLAIN the settlement's statement.
const SettleRowsSQL = settleRowsSQL

// SchemaLockID lets the tests hold a schema's migration lock.
var SchemaLockID = schemaLockID

// BodyTextColumn is what ingest writes in body_text_bytes for m with text
// search on.
func BodyTextColumn(m *NewMessage) int32 { return *(&Store{text: true}).bodyTextColumn(m) }
