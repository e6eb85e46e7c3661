"""The notifier service (SPEC Q10): follows the log and sends e-mail and webhook notifications."""
