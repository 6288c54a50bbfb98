"""Video: decode once into a shared frame cache, select frames causally, pixel codes for tests."""
