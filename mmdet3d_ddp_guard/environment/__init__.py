"""What is installed and how it differs: the supported versions, checked at import
(:mod:`.versions`), which framework is there (:mod:`.frameworks`), the parts of DDP's surface
that changed between torch releases (:mod:`.ddp_compat`), and DDP on a CPU (:mod:`.cpu_ddp`)."""
