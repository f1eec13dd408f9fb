"""The KYC decision: features for antifraud, the policy, the kyc_decision glue."""
