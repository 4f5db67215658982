package config

// Each feature keeps its settings, environment variables and checks in its
// own section_*.go file; these two functions gather them.

func extraEnvVars() []envVar {
	var v []envVar
	for _, f := range []func() []envVar{replayEnvVars, apiEnvVars, cronEnvVars, cleanupEnvVars, alertsEnvVars, managementEnvVars, uiEnvVars, recoveryEnvVars, securityEnvVars} {
		v = append(v, f()...)
	}
	return v
}

func (c *Config) validateExtra() []error {
	var errs []error
	for _, f := range []func() []error{c.validateReplay, c.validateAPI, c.validateCron, c.validateCleanup, c.validateAlerts, c.validateManagement, c.validateUI, c.validateRecovery, c.validateSecurity} {
		errs = append(errs, f()...)
	}
	return errs
}
