package cleanup

import "time"

// What an age of 0 means is decided here, and only here.
//
// In dlq's configuration every age the cleanup job goes by
// (cleanup.retention.*, cleanup.*_ttl and their DLQ_* variables) is always
// set, its default filled in by package config, and 0 keeps the records
// forever. Config.Retention takes those ages as they are. A TTL field of
// Config, though, is 0 when the caller leaves it out, and then takes its
// default, like every zero in a dlq Config; there KeepForever says "keep",
// and ConfiguredTTL turns a configured age into that. The job itself keeps
// whatever has an age of 0 or less (keptForever).

// KeepForever, as a TTL in Config, keeps that kind of record forever.
const KeepForever time.Duration = -1

// ConfiguredTTL is the Config TTL for an age as dlq's configuration states
// it: KeepForever for 0, the age itself otherwise.
func ConfiguredTTL(age time.Duration) time.Duration {
	if age == 0 {
		return KeepForever
	}
	return age
}

// keptForever reports whether records with this retention or TTL are never
// deleted.
func keptForever(age time.Duration) bool { return age <= 0 }
