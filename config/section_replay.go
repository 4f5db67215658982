package config

// Replay configures the replay feature. Its fields are added with the feature.
type Replay struct{}

func defaultReplay() Replay { return Replay{} }

// replayEnvVars lists the environment variables of the replay section.
func replayEnvVars() []envVar { return nil }

// validateReplay checks the replay section.
func (c *Config) validateReplay() []error { return nil }
