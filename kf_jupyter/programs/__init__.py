"""Programs shipped by Tier-2 trainers: self-contained modules whose source is the job's code.

They import nothing from kf_jupyter (a cluster image need not have it) and are only read, never
imported, by kf-jupyter itself when building a job.
"""
