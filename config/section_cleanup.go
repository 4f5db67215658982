package config

// Cleanup configures the cleanup feature. Its fields are added with the feature.
type Cleanup struct{}

func defaultCleanup() Cleanup { return Cleanup{} }

// cleanupEnvVars lists the environment variables of the cleanup section.
func cleanupEnvVars() []envVar { return nil }

// validateCleanup checks the cleanup section.
func (c *Config) validateCleanup() []error { return nil }
