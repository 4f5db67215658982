package config

// Cron configures the cron feature. Its fields are added with the feature.
type Cron struct{}

func defaultCron() Cron { return Cron{} }

// cronEnvVars lists the environment variables of the cron section.
func cronEnvVars() []envVar { return nil }

// validateCron checks the cron section.
func (c *Config) validateCron() []error { return nil }
