"""The framework-free mechanism behind both adapters, on torch alone: which parameters a
backward reached (:mod:`.usage_record`; what it delivers per iteration and counts over the
run, :mod:`.iteration_usage`), the zero gradients that let DDP's reduction complete
(:mod:`.completion`), the counts carried on DDP's last bucket (:mod:`.unused_counts_comm_hook`),
the decision of what to do with unused parameters (:mod:`.decision_policy`), its errors, the
base both adapters' wrappers build through and step with (:mod:`.guarded_wrapper`), and the
end of a step's backwards where a framework runs them outside the wrapper
(:mod:`.step_backwards`)."""
