"""What many tests share: simulated worlds and meshes, the gloo program runner, cases."""
