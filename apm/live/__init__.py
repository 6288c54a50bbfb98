"""Where a run reports besides its records: progress on the terminal and Weights & Biases."""
