"""Decision engines, one subpackage per paper."""
