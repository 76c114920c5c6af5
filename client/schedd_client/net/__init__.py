"""Outbound network access: the policy of what the cluster may reach (pure) and the connections that obey it."""
