package config

// API configures the api feature. Its fields are added with the feature.
type API struct{}

func defaultAPI() API { return API{} }

// apiEnvVars lists the environment variables of the api section.
func apiEnvVars() []envVar { return nil }

// validateAPI checks the api section.
func (c *Config) validateAPI() []error { return nil }
