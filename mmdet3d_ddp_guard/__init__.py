"""mmdet3d_ddp_guard."""
