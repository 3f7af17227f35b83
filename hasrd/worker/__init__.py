"""The worker program: the only hasr process that imports GPU libraries (lazily, after Hello)."""
