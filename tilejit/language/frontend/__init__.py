"""language/frontend"""
