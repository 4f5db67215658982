package cron

import (
	"reflect"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestOnlyTurnsTheRestOff: Only keeps what s names and turns every other
// job off, and the list it walks holds every field of Schedules, so a job
// added later is turned off too (and gets its default, its validation and
// its view through the same list).
func TestOnlyTurnsTheRestOff(t *testing.T) {
	got := Only(Schedules{Cleanup: "@every 200ms", Alerts: "@every 1s"})
	want := Schedules{
		Summary: ScheduleOff, Cleanup: "@every 200ms", Capacity: ScheduleOff, Alerts: "@every 1s",
		Categories: ScheduleOff, Policies: ScheduleOff, Backfills: ScheduleOff, Statistics: ScheduleOff,
	}
	require.Equal(t, want, got)

	var s Schedules
	typ := reflect.TypeOf(s)
	listed := map[string]bool{}
	for _, f := range s.fields() {
		listed[f.field] = true
		sf, ok := typ.FieldByName(f.field)
		require.True(t, ok, "field %s of job %s", f.field, f.job)
		require.Equal(t, reflect.ValueOf(&s).Elem().FieldByIndex(sf.Index).Addr().Interface(), f.spec, "job %s points at field %s", f.job, f.field)
	}
	for i := range typ.NumField() {
		require.True(t, listed[typ.Field(i).Name], "Schedules.%s is missing from Schedules.fields", typ.Field(i).Name)
	}
}
