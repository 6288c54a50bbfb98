"""The APM-Bench release format: typed objects, the loader and validator, runtime instances."""
