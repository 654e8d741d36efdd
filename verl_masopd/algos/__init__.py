"""Advantage estimators and policy losses, registered into verl's registries on import."""
