"""Fakes for what cannot exist on this machine (Azure's services), shaped like their wire format."""
