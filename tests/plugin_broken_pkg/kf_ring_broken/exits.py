"""A plugin module that parses the command line when imported (argparse exits: SystemExit 2)."""

import argparse

parser = argparse.ArgumentParser(prog="kf-ring-exits")
parser.add_argument("--ring-size", type=int, required=True)
ARGS = parser.parse_args()

plugin = None
