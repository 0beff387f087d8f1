"""Plugins that kf-jupyter must refuse, one clear warning each."""
