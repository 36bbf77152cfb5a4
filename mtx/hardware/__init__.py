"""The machine: this CPU's instruction sets, devices, seeding."""
