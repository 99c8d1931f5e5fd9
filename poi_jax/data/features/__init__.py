"""Feature builders: records -> fixed-shape int32 arrays with the keys the models read."""
