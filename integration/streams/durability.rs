//! Durability: restarts, takeovers, replay.
