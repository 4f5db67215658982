package config

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// Every variable whose value cannot be read names its YAML key too (the
// docs promise both), except the *_FILE ones, which name the file.
func TestEnvErrorsNameTheYAMLKey(t *testing.T) {
	t.Parallel()
	for _, e := range envVars() {
		c := Default()
		err := applyEnv(&c, func(n string) string {
			if n == e.name {
				return "x?!"
			}
			return ""
		})
		if err == nil || strings.HasSuffix(e.name, "_FILE") {
			continue
		}
		require.Regexp(t, `\b[a-z]+\.[a-z_]{2,}`, err.Error(), "%s names no YAML key: add it to envKeys", e.name)
		require.Contains(t, err.Error(), e.name)
	}
}

// A schedule is read without the white space around it, by the check and
// by the jobs alike: " off" turns a job off (the jobs once read it as a
// schedule the check had let through).
func TestSchedulesAreTrimmed(t *testing.T) {
	t.Parallel()
	c, err := Load(Flags{}, func(n string) string {
		return map[string]string{"DLQ_CRON_SUMMARY": " off ", "DLQ_CRON_CLEANUP": " @every 5m\t"}[n]
	})
	require.NoError(t, err)
	require.Equal(t, CronOff, c.Cron.Summary)
	require.Equal(t, "@every 5m", c.Cron.Cleanup)
}
