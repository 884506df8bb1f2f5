"""The Hugging Face hub: the pinned repositories a run reads, their cache, fetching them, and released datasets."""
