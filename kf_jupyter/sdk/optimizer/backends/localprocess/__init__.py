"""The optimizer on kf-jupyter's local backend: trials as local jobs (kf-jupyter only)."""
