package config

// Alerts configures the alerts feature. Its fields are added with the feature.
type Alerts struct{}

func defaultAlerts() Alerts { return Alerts{} }

// alertsEnvVars lists the environment variables of the alerts section.
func alertsEnvVars() []envVar { return nil }

// validateAlerts checks the alerts section.
func (c *Config) validateAlerts() []error { return nil }
