"""Chapter experiments: training runs, sweeps and races built on the library (which never imports them)."""
